package main

import "github.com/urfave/cli/v2"

// statusCommand is wired in main.go; its owner replaces this placeholder.
func statusCommand() *cli.Command {
	return &cli.Command{Name: "status", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner status is not built yet", exitError)
	}}
}
