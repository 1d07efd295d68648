// Command skiff-cni is Skiff's CNI plugin, executed by the container
// runtime.
package main

import "github.com/skiff-sdn/skiff/cni"

func main() { cni.Main() }
