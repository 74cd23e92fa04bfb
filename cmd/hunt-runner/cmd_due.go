package main

import "github.com/urfave/cli/v2"

// dueCommand is wired in main.go; its owner replaces this placeholder.
func dueCommand() *cli.Command {
	return &cli.Command{Name: "due", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner due is not built yet", exitError)
	}}
}
