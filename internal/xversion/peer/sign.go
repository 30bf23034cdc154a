//go:build !kiev_nosign

package main

import "github.com/kievrpc/kiev"

// canSign says that this build's kiev signs datagrams (WithPacketKey,
// WithPacketKeys); commits before them build the peer with the tag
// kiev_nosign (nosign.go).
const canSign = true

// signingServer makes a server accept only UDP calls signed with
// packetKey.
func signingServer() []kiev.ServerOption {
	return []kiev.ServerOption{kiev.WithPacketKeys(func(id string) ([]byte, bool) {
		return packetKey, id == packetKeyID
	})}
}

// signingClient makes a client sign its UDP calls with packetKey.
func signingClient() []kiev.DialOption {
	return []kiev.DialOption{kiev.WithPacketKey(packetKeyID, packetKey)}
}
