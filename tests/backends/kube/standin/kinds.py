"""The resource types the stand-in serves (API discovery data)."""


class KindInfo:
    def __init__(self, plural, kind, group, version, namespaced, short_names=(), categories=(),
                 subresources=("status",)):
        self.plural, self.kind, self.group, self.version = plural, kind, group, version
        self.namespaced = namespaced
        self.short_names, self.categories, self.subresources = list(short_names), list(categories), subresources
        self.singular = kind.lower()
        self.api_version = "%s/%s" % (group, version) if group else version
        self.qualified = "%s.%s" % (plural, group) if group else plural        # e.g. jobs.batch
        self.kind_qualified = "%s.%s" % (kind, group) if group else kind       # e.g. Job.batch


VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

KINDS = {
    "jobs": KindInfo("jobs", "Job", "batch", "v1", True, categories=("all",)),
    "pods": KindInfo("pods", "Pod", "", "v1", True, ("po",), ("all",), ("status", "log", "binding")),
    "nodes": KindInfo("nodes", "Node", "", "v1", False, ("no",)),
    "namespaces": KindInfo("namespaces", "Namespace", "", "v1", False, ("ns",)),
    # Dynamic Resource Allocation (resource.k8s.io/v1, GA in Kubernetes 1.34): see dra.py.
    "resourceclaims": KindInfo("resourceclaims", "ResourceClaim", "resource.k8s.io", "v1", True),
    "resourceclaimtemplates": KindInfo("resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io", "v1",
                                       True, subresources=()),
    "resourceslices": KindInfo("resourceslices", "ResourceSlice", "resource.k8s.io", "v1", False, subresources=()),
    "deviceclasses": KindInfo("deviceclasses", "DeviceClass", "resource.k8s.io", "v1", False, subresources=()),
}
GROUP_KINDS = {"": ["pods", "nodes", "namespaces"], "batch": ["jobs"],
               "resource.k8s.io": ["deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"]}
# The API groups served under /apis, with their one version each.
API_GROUPS = {"batch": "v1", "resource.k8s.io": "v1"}


def api_resource_list(group):
    """API discovery: /api/v1, /apis/batch/v1 and /apis/resource.k8s.io/v1 (APIResourceList, legacy unaggregated discovery)."""
    res = []
    for plural in GROUP_KINDS[group]:
        k = KINDS[plural]
        r = {"name": plural, "singularName": k.singular, "namespaced": k.namespaced, "kind": k.kind,
             "verbs": VERBS}
        if k.short_names:
            r["shortNames"] = k.short_names
        if k.categories:
            r["categories"] = k.categories
        res.append(r)
        for sub in k.subresources:
            if sub == "status":
                res.append({"name": plural + "/status", "singularName": "", "namespaced": k.namespaced,
                            "kind": k.kind, "verbs": ["get", "patch", "update"]})
            elif sub == "log":
                res.append({"name": plural + "/log", "singularName": "", "namespaced": True,
                            "kind": "Pod", "verbs": ["get"]})
            elif sub == "binding":
                res.append({"name": plural + "/binding", "singularName": "", "namespaced": True,
                            "kind": "Binding", "verbs": ["create"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": "%s/%s" % (group, API_GROUPS[group]) if group else "v1", "resources": res}
