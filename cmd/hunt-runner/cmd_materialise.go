package main

import "github.com/urfave/cli/v2"

// materialiseCommand is wired in main.go; its owner replaces this placeholder.
func materialiseCommand() *cli.Command {
	return &cli.Command{Name: "materialise", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner materialise is not built yet", exitError)
	}}
}
