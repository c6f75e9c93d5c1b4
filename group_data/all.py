"""Deploy defaults for every host: pyinfra's data of group `all`.

Every setting, its default and what it does are in sglang_deploy/plan/settings/ (the one place
they are written; docs/settings.md lists them). What the server runs is not here: that is the
profile's job (profiles/*.yml; profile defaults live in sglang_deploy/profile/schema.py).

A setting can be changed for a host (its entry in inventory/hosts.yml, the sandbox inventory),
for a group (group_data/<group>.py), for a run (`pyinfra ... --data profile=eagle3-2step`), or
here, for every host, by assigning it below the line that loads the defaults. A key that is no
setting (nor pyinfra's own) stops the deploy before any host is touched, naming it.
"""

# An imported name is no host data for pyinfra; the leading underscore keeps it out of
# plan/hosts.py deploy_defaults() too.
from sglang_deploy.plan.settings import group_defaults as _group_defaults

globals().update(_group_defaults())
