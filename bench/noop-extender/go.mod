module muster.local/bench/noop-extender

go 1.25.0
