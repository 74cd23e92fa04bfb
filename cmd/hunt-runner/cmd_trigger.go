package main

import "github.com/urfave/cli/v2"

// triggerCommand is wired in main.go; its owner replaces this placeholder.
func triggerCommand() *cli.Command {
	return &cli.Command{Name: "trigger", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner trigger is not built yet", exitError)
	}}
}
