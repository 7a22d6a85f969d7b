// Where the Kubernetes API server is and how to prove who we are: from kubeconfig files (merged
// as kubectl merges the KUBECONFIG list) or from inside a pod (the service account's files).
//
// Kubeconfig rules followed (kubectl's "Organizing Cluster Access Using kubeconfig Files"):
// - the files of the list are read in order; for `current-context` and for every named cluster,
//   user and context, the first file that sets it wins; a missing file in the list is skipped
//   (an explicitly named single file must exist);
// - a relative path in a file (certificate-authority, client-certificate, client-key, tokenFile)
//   is relative to that file's directory;
// - `*-data` fields are base64 PEM and win over their file counterparts.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::backends::kube {

struct Connection {
  std::string server;           // "https://host:port" (or "http://..." for a local stand-in)
  std::string ca_pem;           // CAs the server's certificate must chain to ("" : the system's)
  bool insecure = false;        // insecure-skip-tls-verify
  std::string tls_server_name;  // the name the server's certificate is checked against
  std::string client_cert_pem;  // mutual TLS
  std::string client_key_pem;
  std::string token;       // a fixed bearer token
  std::string token_file;  // a bearer token re-read as it rotates (tokenFile, service account)
  std::string ns;          // the context's namespace ("" : none set)
  std::string source;      // "kubeconfig /path (context X)" or "in-cluster", for messages
};

// The files a `kubeconfig` setting names: a ':'-separated list (as KUBECONFIG), or, when empty,
// $KUBECONFIG, else ~/.kube/config.
std::vector<std::string> KubeconfigFiles(const std::string& setting);

// The connection of `context` ("" : the merged current-context) in `files`. Errors name the
// file and field: an unknown context, a context naming a cluster or user no file defines, a
// cluster without a server, unreadable certificate files, bad base64.
Result<Connection> LoadKubeconfig(const std::vector<std::string>& files,
                                  const std::string& context = "");

// Inside a pod: KUBERNETES_SERVICE_HOST/PORT, and under `dir` (default the service account's
// mount) token (re-read as it rotates), ca.crt and namespace.
Result<Connection> LoadInCluster(
    const std::string& dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// Standard base64 (padding optional, line breaks ignored); nullopt-like error on bad input.
Result<std::string> DecodeBase64(const std::string& text);

}  // namespace tessera::backends::kube
