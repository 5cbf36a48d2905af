// Package docscheck holds tests that hold the documentation to the tree: the map of the
// code in docs/architecture.md ("Shape") lists every package, and nothing that is gone.
package docscheck
