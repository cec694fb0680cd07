// Package layout has no code of its own: its tests hold the module's tree to
// the boundaries docs/architecture.md draws (which package may import
// which: TestDrawing, TestDeps), to one package comment per package, and
// its tests to one way of waiting (testutil's).
package layout
