package main

import "github.com/urfave/cli/v2"

// schemaCommand is wired in main.go; its owner replaces this placeholder.
func schemaCommand() *cli.Command {
	return &cli.Command{Name: "schema", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner schema is not built yet", exitError)
	}}
}
