"""``ThreadState``'s definitions and env: loading the tenant's models, prompts and agents,
and resolving the env (thread > tool config > agent > prompt > tenant > platform)."""

from __future__ import annotations

from typing import Any, Literal

from agents import selectors as definitions
from agents.documents import AgentDoc, PromptDoc
from agents.providers.base import ModelSpec
from common.errors import NotFound
from threads.services.env import EnvResolver, thread_env_set_everywhere
from threads.state.base import StateBase


class ResourcesMixin(StateBase):
    def load_model(self, name: str) -> ModelSpec:
        """The model ``name``, its ``api_key_env`` read without the platform level."""
        tenant_levels = self._resolver(platform=False)

        def lookup(variable: str) -> str | None:
            found = tenant_levels.resolve(variable)
            return None if found is None else found.value

        return definitions.model_load(tenant=self._thread.tenant, name=name, env=lookup)

    def load_prompt(self, name: str) -> PromptDoc:
        return definitions.prompt_load(tenant=self._thread.tenant, name=name)

    def load_agent(self, name: str) -> AgentDoc:
        return definitions.agent_load(tenant=self._thread.tenant, name=name)

    def get_model_names(self) -> list[str]:
        return definitions.model_names(tenant=self._thread.tenant)

    def get_prompt_names(self) -> list[str]:
        return definitions.prompt_names(tenant=self._thread.tenant)

    def get_agent_names(self) -> list[str]:
        return definitions.agent_names(tenant=self._thread.tenant)

    # Env -----------------------------------------------------------------------

    def _resolver(self, *, platform: bool = True) -> Any:
        agent: AgentDoc | None
        prompt: PromptDoc | None
        try:
            agent = self.load_agent(self._thread.agent_name)
        except NotFound:
            agent = None
        prompt_name = self._prompt_name or (agent.side_a.prompt if agent else None)
        try:
            prompt = self.load_prompt(prompt_name) if prompt_name else None
        except NotFound:
            prompt = None
        return EnvResolver(
            thread=self._thread,
            tool_env=self._tool_env,
            agent_env=agent.env if agent else {},
            prompt_env=prompt.env if prompt else {},
            # This state is handed to the operator's registry code only, which may read
            # what the operator passes it.
            platform=definitions.platform_env if platform else definitions.no_env,
        )

    def env(self, name: str) -> str:
        """The value of ``name`` (thread > tool config > agent > prompt > tenant > platform:
        this state is the operator's registry code's, which may read the platform level).

        Raises NotFound("Environment variable not found: NAME") when no level has it.
        """
        value: str = self._resolver().value(name)
        return value

    def env_type(self, name: str) -> Literal["text", "secret"]:
        kind: Literal["text", "secret"] = self._resolver().type(name)
        return kind

    def _env_or_none(self, name: str) -> str | None:
        try:
            return self.env(name)
        except NotFound:
            return None

    def set_env(
        self, name: str, value: str, *, type: Literal["text", "secret"] | None = None
    ) -> None:
        """Write the thread's env and its non-terminated descendants' (minus names their
        agents declare scoped). ``type`` None keeps an existing type; new names are secret."""
        thread_env_set_everywhere(thread=self._thread, name=name, value=value, type=type)
