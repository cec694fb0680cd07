// Package layout has no code of its own: its tests hold the module's tree to
// the boundaries docs/architecture.md draws (which package may import
// which) and to one package comment per package.
package layout
