// Package health holds a kiev server's health: the checks of its
// dependencies and the health service that answers whether it serves.
//
// Every kiev.Server serves [ServiceName], after gRPC's
// grpc.health.v1.Health, over TCP, UDP and HTTP: Check answers whether the
// server, or one of its services, serves, and Watch waits for that to
// change. Call it at kiev.MaxPriority, so that an overloaded server sheds
// it last:
//
//	ctx := kiev.WithPriority(ctx, kiev.MaxPriority)
//	var r health.CheckResponse
//	err := c.Call(ctx, health.ServiceName+".Check", health.CheckRequest{}, &r)
//
// The server wires the service in itself: it keeps its checks in a
// [Checks] (Server.RegisterHealth adds one) and its own say in a
// [Reporter] (Server.SetHealth). This package does not import kiev.
package health
