"""Settings package: everything comes from the environment through `env.py`.

`base` holds every setting; `production` tightens security for deployments.
DJANGO_SETTINGS_MODULE defaults to `project.settings` (this module), which is `base`.
"""

from project.settings.base import *  # noqa: F403
