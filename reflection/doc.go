// Package reflection describes a kiev server's services: the shapes of
// their methods' arguments and replies, as kiev's msgpack codec puts them
// on the wire.
//
// Every kiev.Server serves [ServiceName] besides its own services, so
// that a tool such as the kiev command (cmd/kiev) can list a server's
// methods and call them without the server's Go types:
//
//	var info reflection.ServiceInfo
//	err := c.Call(ctx, reflection.ServiceName+".Describe", "Arith", &info)
//
// The server wires the service in itself ([NewService] with a [Server]
// of its own); this package does not import kiev. kiev.NewMethod uses
// [ShapeOf] and [Fits] to check a client's types against a server's.
package reflection
