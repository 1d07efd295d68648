// Command skiffctl is the operator CLI of Skiff.
package main

import (
	"fmt"
	"os"

	"github.com/skiff-sdn/skiff/internal/ctl"
)

func main() {
	if err := ctl.NewRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skiffctl:", err)
		os.Exit(1)
	}
}
