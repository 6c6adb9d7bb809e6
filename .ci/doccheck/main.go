// Command doccheck checks the documentation for .ci/check-docs. It has
// three modes:
//
//	doccheck exported [dir]    every exported identifier of the package in
//	                           dir (default ".") has a doc comment
//	doccheck links markdown... every relative link in the markdown files
//	                           resolves
//	doccheck names [root]      every file that a Go comment or a markdown
//	                           file under root (default ".") cites exists,
//	                           and none cites an absolute path on a machine
//
// Each prints one line per problem, "file:line: what", and exits 1 when it
// found any.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var problems []string
	var err error
	switch os.Args[1] {
	case "exported":
		dir := "."
		if len(os.Args) > 2 {
			dir = os.Args[2]
		}
		problems, err = checkExported(dir)
	case "links":
		problems, err = checkLinks(os.Args[2:])
	case "names":
		root := "."
		if len(os.Args) > 2 {
			root = os.Args[2]
		}
		problems, err = checkNames(root)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "doccheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: doccheck exported [dir] | doccheck links markdown... | doccheck names [root]")
	os.Exit(2)
}
