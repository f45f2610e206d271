"""Approvals and decisions, as one unit: what a person approved, and the answer before a call.

A host or gateway asks before a call whether a tool's current definition is still the one a person
approved (docs/contract.md section 10). Everything about that lives here, one module per role, and
`deploy/architecture.py` ranks each role in the layer it belongs to, so arrows still point one way:

| module | role (layer) | what |
|---|---|---|
| `errors` | core | one error type per way a change to approvals can fail |
| `policy` | core | the policy: approved, changed, revoked, never approved; enforced hints; freshness |
| `names` | core | how hosts name servers and tools, and matching such a name to a monitored server |
| `inputs` | core | reading a host's hook input, whatever it is, for the few fields a decision needs |
| `gatewaywire` | core | agentgateway's ExtMcp messages (`ext_mcp.proto`), described at run time |
| `records` | store | the API shapes of an approval event, a kept decision, an unmonitored name |
| `models` | store | the tables: approval events, kept decisions, names' generation, unmonitored names |
| `storage` | store | the approval history (events kept forever) and the kept decisions |
| `cache` | store | the per-process decision cache, valid for one generation of the database |
| `service` | notify | approve (resolving the alerts it answers), revoke, set the mode: what adapters call |
| `recorder` | notify | decisions' writes (kept decisions, host-session beats) on a thread of their own |
| `point` | notify | the decision point: the cache, the recorder and the counters behind every adapter |
| `api` | webapp | `/api/v1/servers/{name}/approvals`, `/api/v1/decisions`, enforced annotations |
| `hooks` | webapp | the hosts' shapes: Claude Code's, Codex's and Gemini CLI's hooks, ToolHive's PDP |
| `gateway` | webapp | agentgateway's MCP guardrails: the ExtMcp gRPC service `serve` runs beside the app |
| `lane` | webapp | the decision lane: admission, a deadline and threads of its own (bounded answers) |
| `pages` | webapp | approving and revoking from the dashboard |
| `cli` | cli | `drift-monitor approve`, `revoke` |
| `hookcommand` | cli | `drift-monitor hook HOST`: a command hook, standard library only, failing closed |
"""
