// Package layering holds the checks of the module's layering that an import
// linter cannot make: its tests read the public packages' exported API. The
// import rules themselves (which package may import which) live in
// .golangci.yml under depguard.
package layering
