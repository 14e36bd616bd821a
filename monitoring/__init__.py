"""Dashboards as code, alert rules and the local Prometheus config, all from the metric contract."""
