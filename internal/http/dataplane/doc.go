// Package dataplane is the API's data plane: what reaches into a ready
// sandbox (exec, files, archives, its ports through the API and preview
// URLs, and the previews' management), the activity record of each such
// call, and the routing of a call to the node that holds its sandbox.
// Background processes, their terminals and file watches are package
// processes, which uses this one's.
package dataplane
