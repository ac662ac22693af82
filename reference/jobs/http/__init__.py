"""The job system's HTTP API (app), its OpenAPI document (openapi.yaml) and its tokens' roles (auth)."""
