"""Running the service: its metrics, hot reload of the config, TLS, and work on a timer."""
