"""RTL benchmarks behind ``dysharp bench``: each writes its figures as JSON under build/."""
