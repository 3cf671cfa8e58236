"""dysharp: an RTL-level model of DySHARP (dynamic in-switch multicast and reduction in an NVSwitch)."""
