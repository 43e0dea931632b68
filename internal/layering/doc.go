// Package layering has no code: its test enforces the import rules of
// docs/architecture.md (Packages) on the whole module, as depguard does in make lint, so that CI
// (which runs the tests) catches a wrong arrow too. The agent and the CLI
// never import each other; what both need lives in api/v1alpha1,
// internal/peering or another leaf package, and the agent binary links no
// Helm, pterm, cli-runtime or embedded chart.
package layering
