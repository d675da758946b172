"""Developer tools: commands for trying kstage and writing plugins, never needed to run it.

``kstage demo`` (:mod:`service.dev.demo`, with the sample events of :mod:`service.dev.samples`),
``kstage processors new`` (:mod:`service.dev.scaffold` and its ``templates/``) and
``kstage config from-*`` (:mod:`service.dev.translate`).
The CLI imports each module only when its command runs, so this package re-exports nothing.
"""

__all__: list[str] = []
