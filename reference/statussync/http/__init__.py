"""The status service's HTTP API (app), its callers' roles (auth) and its OpenAPI document (openapi)."""
