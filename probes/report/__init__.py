"""The circuit report: the only place that writes sentences, tables, figures and documents. Each
part is a (measure, render) pair over typed probe results."""
