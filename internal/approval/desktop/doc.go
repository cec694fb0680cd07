// Package desktop asks a person at a graphical desktop: [Desktop] is an
// [github.com/rootgate/rootgate/internal/approval.Approver] that shows a request in a
// freedesktop.org notification with Approve and Deny buttons over D-Bus, or
// failing that in a zenity dialog. rootgate approve --desktop uses it.
package desktop
