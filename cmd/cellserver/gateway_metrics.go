package main

import (
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/gateway"
)

// gatewayObserver is the Observer that counts the gateways' decisions in
// the server's metrics registry.
func gatewayObserver(exec *commands.Server) gateway.Observer { return nil }
