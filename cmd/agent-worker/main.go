// Command agent-worker is the stock worker: it runs the sessions of one
// Agent from the configuration the operator renders, with the scripted demo
// model and no function tools of its own. Teams that add Go function tools
// build their own worker on package worker.
package main

import "github.com/stepwise-run/stepwise/pkg/worker"

func main() {
	worker.Main(worker.Options{})
}
