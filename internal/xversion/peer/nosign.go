//go:build kiev_nosign

package main

import "github.com/kievrpc/kiev"

// canSign says that this build's kiev does not sign datagrams: it is
// built from a commit before WithPacketKey and WithPacketKeys.
const canSign = false

func signingServer() []kiev.ServerOption { return nil }

func signingClient() []kiev.DialOption { return nil }
