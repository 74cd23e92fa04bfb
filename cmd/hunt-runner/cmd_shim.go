package main

import "github.com/urfave/cli/v2"

// shimCommand is wired in main.go; its owner replaces this placeholder.
func shimCommand() *cli.Command {
	return &cli.Command{Name: "shim", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner shim is not built yet", exitError)
	}}
}
