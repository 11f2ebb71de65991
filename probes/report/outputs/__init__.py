"""What the report writes besides report.md: the self-contained report.html (with the example
attention it shows), the field's exchange formats (MIB, attribution graphs), and docs/results pages."""
