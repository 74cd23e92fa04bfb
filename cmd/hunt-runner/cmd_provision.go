package main

import "github.com/urfave/cli/v2"

// provisionCommand is wired in main.go; its owner replaces this placeholder.
func provisionCommand() *cli.Command {
	return &cli.Command{Name: "provision", Usage: "(not built yet)", Action: func(*cli.Context) error {
		return cli.Exit("hunt-runner provision is not built yet", exitError)
	}}
}
