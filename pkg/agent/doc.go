// Package agent is the public Go API for the workers that run agent
// sessions: the agent definition, function tools with their effect class and
// approval, the model client interface, and the scripted model client.
//
// A team adds Go function tools by building its own worker on this package
// and package worker, then naming that image in the Agent's
// spec.workers.image. The Agent's tool policies apply to those tools as to any
// other.
package agent
