// Command hello is built by proctest's own tests.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("hello from", os.Args[0])
}
