// Command api is Tether, built as bin/tether: the service, its commands
// and the ops commands, with the built-in providers. It is all package
// server's; a program that runs Tether with providers of its own calls
// server.Main the same way, with them in server.Options.
//
//	tether [serve] [--no-migrate]   run the service (the default)
//	tether migrate                  apply the schema migrations and exit
//	tether keys create --tenant T [--name N]   make an API key for tenant T and print it
//	tether sandboxes|snapshots|pools|previews|events|owners|keys   ops commands over the REST API: runs tetherctl (cmd/tetherctl)
//	tether help                     the commands, and every setting with its default
package main

import "github.com/tetherhq/tether/server"

func main() { server.Main(server.Options{}) }
