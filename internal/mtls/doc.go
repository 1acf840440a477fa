// Package mtls holds the TLS material of a metastore member and the TLS
// configurations built from it.
//
// A member has one certificate and key (used as the server certificate of
// the HTTP API and of Raft, and as the client certificate when it dials
// another member) and one CA bundle that every member certificate chains to.
// A Reloader keeps the current material and re-reads the files when they
// change, so new connections pick up a rotated certificate or CA without a
// restart; a bad new file keeps the old material.
//
// What is verified:
//
//   - HTTP API (server side): the member certificate is offered; a client
//     certificate is not required, but one that is presented must chain to
//     the CA.
//   - Member to member HTTP (forwarding, join): the usual web check, the
//     chain to the CA plus the host name or IP address of the URL against
//     the certificate's SANs.
//   - Raft, in both directions: mutual TLS. The peer must present a
//     certificate that chains to the CA and whose extended key usage allows
//     both server and client authentication: the member identity (see
//     VerifyMember). Raft addresses are not checked against the SANs: they
//     are often IP addresses behind NAT or reassigned by an orchestrator,
//     and every member holds the same authority in Raft anyway (any member
//     may lead), so a member certificate used at another address gains
//     nothing. The CA is therefore the cluster boundary: it must be
//     dedicated to the cluster and sign only member certificates with
//     both usages (metastore certs member makes them).
//
// NewCA and NewMember make certificates with the standard library only
// (ECDSA P-256); WriteFileAtomic writes them.
package mtls
