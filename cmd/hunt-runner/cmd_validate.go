package main

import "github.com/urfave/cli/v2"

// validateCommand is wired in main.go; its owner replaces this placeholder.
func validateCommand() *cli.Command {
	return &cli.Command{Name: "validate", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner validate is not built yet", exitError)
	}}
}
