//go:build !linux

package chtest

import "syscall"

// chDB ships for Linux only; elsewhere chlocal cannot run anyway.
func deathSignal() *syscall.SysProcAttr { return nil }

func lockThread() {}
