"""Approvals and decisions: what a person approved, and the answer a host gets before a call.

A host or gateway asks before a call whether a tool's current definition is still the one a person
approved (docs/contract.md section 10). This package is that concept as the product offers it; its
tables are the store's (`monitor.store.access`), like every table.

- `policy`, `errors`, `names`, `inputs`: the decision policy and enforced hints; why a change is
  refused; how hosts name servers and tools; reading any hook input.
- `records`, `storage`, `cache`: the API shapes; the approval history and kept decisions; the
  per-process decision cache, valid for one generation of the database.
- `service`: approve (resolving the alerts it answers), revoke, set the mode: what adapters call.
- `recorder`, `point`, `lane`: decisions' writes off the request path; the decision point behind
  every adapter; admission with a deadline.
- `api`, `pages`, `cli`: `/api/v1/servers/{name}/approvals` and `/api/v1/decisions`; the dashboard's
  forms; `drift-monitor approve`, `revoke`.
- `hosts/`, `hooks`: one module per host adapter (Claude Code, Codex, Gemini CLI, ToolHive), and
  their routes.
- `gateway`, `gatewaywire`: agentgateway's MCP guardrails, the ExtMcp gRPC service `serve` runs
  beside the app, and its messages.
- `hookcommand`: `drift-monitor hook HOST`, a command hook, standard library only, failing closed.
"""
