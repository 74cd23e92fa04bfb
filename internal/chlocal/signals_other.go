//go:build !linux

package chlocal

type savedSignals struct{}

// chDB ships for Linux only; elsewhere Start fails when loading the library.
func saveSignals() savedSignals   { return savedSignals{} }
func restoreSignals(savedSignals) {}
