// Package admin serves a kiev server's admin pages: its status page, with
// charts of the last 15 minutes, and the page's JSON twin, Prometheus
// metrics, and Kubernetes probes.
//
// A kiev.Server makes them with Server.AdminHandler, to mount on a mux of
// your own, or serves them on an address of their own with the option
// kiev.WithAdmin. The kiev command's stat reads the JSON twin into a
// [Status]:
//
//	resp, err := http.Get("http://127.0.0.1:9090/debug/kiev?format=json")
//	...
//	var st admin.Status
//	err = json.NewDecoder(resp.Body).Decode(&st)
//
// Every kiev.Server also serves [ServiceName], whose Status answers with
// the same Status over RPC, so that stat works with the address clients
// dial. The page's charts draw a [History] of the last 15 minutes.
//
// The pages read the server through the [Server] interface; this package
// does not import kiev.
package admin
