"""Reference models: what every DUT is checked against."""
