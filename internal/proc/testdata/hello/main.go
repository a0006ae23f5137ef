// Command hello is built by proc's own tests.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("hello from", os.Args[0])
}
