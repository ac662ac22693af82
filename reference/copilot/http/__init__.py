"""The Copilot-facing HTTP API (Flask): drafts, approvals, confirmation, task reads, SSE, webhooks."""
