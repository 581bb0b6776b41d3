"""From a failing capture to its cause: bisect, blame, minimize, and the probes they ask."""
