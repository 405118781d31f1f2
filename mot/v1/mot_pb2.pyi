from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CacheMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_MODE_UNSPECIFIED: _ClassVar[CacheMode]
    CACHE_MODE_AUTO: _ClassVar[CacheMode]
    CACHE_MODE_TRANSLATE: _ClassVar[CacheMode]
    CACHE_MODE_NATIVE: _ClassVar[CacheMode]
    CACHE_MODE_NONE: _ClassVar[CacheMode]

class CacheSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_SOURCE_UNSPECIFIED: _ClassVar[CacheSource]
    CACHE_SOURCE_TRANSLATED_HIT: _ClassVar[CacheSource]
    CACHE_SOURCE_TRANSLATED_FRESH: _ClassVar[CacheSource]
    CACHE_SOURCE_NATIVE_PREFILL: _ClassVar[CacheSource]
    CACHE_SOURCE_NONE: _ClassVar[CacheSource]
CACHE_MODE_UNSPECIFIED: CacheMode
CACHE_MODE_AUTO: CacheMode
CACHE_MODE_TRANSLATE: CacheMode
CACHE_MODE_NATIVE: CacheMode
CACHE_MODE_NONE: CacheMode
CACHE_SOURCE_UNSPECIFIED: CacheSource
CACHE_SOURCE_TRANSLATED_HIT: CacheSource
CACHE_SOURCE_TRANSLATED_FRESH: CacheSource
CACHE_SOURCE_NATIVE_PREFILL: CacheSource
CACHE_SOURCE_NONE: CacheSource

class Documents(_message.Message):
    __slots__ = ("documents",)
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, documents: _Optional[_Iterable[str]] = ...) -> None: ...

class PutContextRequest(_message.Message):
    __slots__ = ("text", "documents")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    text: str
    documents: Documents
    def __init__(self, text: _Optional[str] = ..., documents: _Optional[_Union[Documents, _Mapping]] = ...) -> None: ...

class PutContextResponse(_message.Message):
    __slots__ = ("context_id", "token_count", "stored_bytes", "already_cached", "source_model", "source_fingerprint")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALREADY_CACHED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    token_count: int
    stored_bytes: int
    already_cached: bool
    source_model: str
    source_fingerprint: str
    def __init__(self, context_id: _Optional[str] = ..., token_count: _Optional[int] = ..., stored_bytes: _Optional[int] = ..., already_cached: _Optional[bool] = ..., source_model: _Optional[str] = ..., source_fingerprint: _Optional[str] = ...) -> None: ...

class SamplingOptions(_message.Message):
    __slots__ = ("max_new_tokens", "temperature", "top_p", "top_k", "seed", "stop")
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, max_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("context_id", "target_model", "prompt", "mode", "sampling")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    target_model: str
    prompt: str
    mode: CacheMode
    sampling: SamplingOptions
    def __init__(self, context_id: _Optional[str] = ..., target_model: _Optional[str] = ..., prompt: _Optional[str] = ..., mode: _Optional[_Union[CacheMode, str]] = ..., sampling: _Optional[_Union[SamplingOptions, _Mapping]] = ...) -> None: ...

class GenerationFacts(_message.Message):
    __slots__ = ("cache_source", "ttft_ms", "cache_ms", "total_ms", "context_tokens", "prompt_tokens", "generated_tokens", "finish_reason", "translator_version")
    CACHE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TRANSLATOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    cache_source: CacheSource
    ttft_ms: float
    cache_ms: float
    total_ms: float
    context_tokens: int
    prompt_tokens: int
    generated_tokens: int
    finish_reason: str
    translator_version: str
    def __init__(self, cache_source: _Optional[_Union[CacheSource, str]] = ..., ttft_ms: _Optional[float] = ..., cache_ms: _Optional[float] = ..., total_ms: _Optional[float] = ..., context_tokens: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., finish_reason: _Optional[str] = ..., translator_version: _Optional[str] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("text", "facts")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    text: str
    facts: GenerationFacts
    def __init__(self, text: _Optional[str] = ..., facts: _Optional[_Union[GenerationFacts, _Mapping]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("context_id", "target_model", "prompt", "continuation", "mode")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    target_model: str
    prompt: str
    continuation: str
    mode: CacheMode
    def __init__(self, context_id: _Optional[str] = ..., target_model: _Optional[str] = ..., prompt: _Optional[str] = ..., continuation: _Optional[str] = ..., mode: _Optional[_Union[CacheMode, str]] = ...) -> None: ...

class TokenScore(_message.Message):
    __slots__ = ("token_id", "text", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    text: str
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., text: _Optional[str] = ..., logprob: _Optional[float] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("tokens", "total_logprob", "cache_source")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    CACHE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[TokenScore]
    total_logprob: float
    cache_source: CacheSource
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenScore, _Mapping]]] = ..., total_logprob: _Optional[float] = ..., cache_source: _Optional[_Union[CacheSource, str]] = ...) -> None: ...

class GetCacheRequest(_message.Message):
    __slots__ = ("context_id", "target_model")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_MODEL_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    target_model: str
    def __init__(self, context_id: _Optional[str] = ..., target_model: _Optional[str] = ...) -> None: ...

class CacheChunk(_message.Message):
    __slots__ = ("data", "index", "total", "total_bytes", "target_fingerprint", "cache_source")
    DATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TARGET_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    CACHE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    index: int
    total: int
    total_bytes: int
    target_fingerprint: str
    cache_source: CacheSource
    def __init__(self, data: _Optional[bytes] = ..., index: _Optional[int] = ..., total: _Optional[int] = ..., total_bytes: _Optional[int] = ..., target_fingerprint: _Optional[str] = ..., cache_source: _Optional[_Union[CacheSource, str]] = ...) -> None: ...

class DeleteContextRequest(_message.Message):
    __slots__ = ("context_id",)
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    def __init__(self, context_id: _Optional[str] = ...) -> None: ...

class DeleteContextResponse(_message.Message):
    __slots__ = ("deleted_entries",)
    DELETED_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    deleted_entries: int
    def __init__(self, deleted_entries: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "role", "model_type", "fingerprint", "num_layers", "translator", "translator_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    TRANSLATOR_FIELD_NUMBER: _ClassVar[int]
    TRANSLATOR_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    model_type: str
    fingerprint: str
    num_layers: int
    translator: str
    translator_version: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., model_type: _Optional[str] = ..., fingerprint: _Optional[str] = ..., num_layers: _Optional[int] = ..., translator: _Optional[str] = ..., translator_version: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("store_entries", "store_bytes", "store_budget_bytes", "counters", "store_available")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STORE_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORE_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    STORE_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    store_entries: int
    store_bytes: int
    store_budget_bytes: int
    counters: _containers.ScalarMap[str, int]
    store_available: bool
    def __init__(self, store_entries: _Optional[int] = ..., store_bytes: _Optional[int] = ..., store_budget_bytes: _Optional[int] = ..., counters: _Optional[_Mapping[str, int]] = ..., store_available: _Optional[bool] = ...) -> None: ...
