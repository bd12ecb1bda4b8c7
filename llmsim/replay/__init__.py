"""Record and replay: `llmsim record` (a proxy writing fixtures) and `llmsim serve --replay`."""
