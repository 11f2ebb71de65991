"""Models whose circuit is known: planted by hand, or compiled from RASP programs by Tracr."""
