package main

import "github.com/urfave/cli/v2"

// runCommand is wired in main.go; its owner replaces this placeholder.
func runCommand() *cli.Command {
	return &cli.Command{Name: "run", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner run is not built yet", exitError)
	}}
}
