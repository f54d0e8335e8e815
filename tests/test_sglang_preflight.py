"""Server-flag preflight against the fake server over HTTP: each wrong flag is refused with the exact flag to add."""
import pytest
from fake_sglang import FakeSGLang, GOOD_ARGS
from eagle_nb.core import EagleNbError
from eagle_nb.sglang import preflight, server_info
from eagle_nb.target import tiny_target

TGT = tiny_target('llama')


@pytest.mark.parametrize('override,flag', [
    (dict(enable_return_hidden_states=False), '--enable-return-hidden-states'),
    (dict(disable_radix_cache=False), '--disable-radix-cache'),
    (dict(chunked_prefill_size=512), '--chunked-prefill-size -1'),
    (dict(disable_cuda_graph=False), '--disable-cuda-graph'),
    (dict(speculative_algorithm='EAGLE3'), 'without --speculative-algorithm EAGLE3'),
])
def test_refusal_names_the_flag(override, flag):
    with FakeSGLang(TGT, server_args={**GOOD_ARGS, **override}) as srv:
        url = srv.url
        with pytest.raises(EagleNbError) as e: preflight([url], max_len=1024)
    msg = str(e.value)
    assert url in msg and f'restart it {"with: " if flag.startswith("--") else ""}{flag}' in msg and '\n' not in msg


def test_several_flags_at_once_and_defaults():
    with FakeSGLang(TGT, server_args={}) as srv:          # SGLang's defaults: nothing set for extraction
        with pytest.raises(EagleNbError) as e: preflight([srv.url])
    assert ('restart it with: --enable-return-hidden-states --disable-radix-cache --chunked-prefill-size -1 '
            '--disable-cuda-graph') in str(e.value)


def test_large_enough_chunk_and_cuda_graph_waiver():
    with FakeSGLang(TGT, server_args={**GOOD_ARGS, 'chunked_prefill_size': 8192, 'disable_cuda_graph': False}) as srv:
        assert srv.url in preflight([srv.url], max_len=4096, allow_cuda_graph=True)
        with pytest.raises(EagleNbError, match='--chunked-prefill-size -1'): preflight([srv.url], max_len=10000, allow_cuda_graph=True)


@pytest.mark.parametrize('old_api,new_api', [(True, False), (False, True)])
def test_old_and_new_server_info_endpoints(old_api, new_api):
    with FakeSGLang(TGT, old_api=old_api, new_api=new_api, version='0.9.1') as srv:
        info = server_info(srv.url)
    assert info['version'] == '0.9.1' and info['disable_radix_cache'] is True


def test_unreachable_and_not_sglang():
    with pytest.raises(EagleNbError, match='cannot reach'): preflight(['http://127.0.0.1:9'], timeout=2)
    with FakeSGLang(TGT, old_api=False, new_api=False) as srv:
        with pytest.raises(EagleNbError, match='is this an SGLang server'): preflight([srv.url])
    with pytest.raises(EagleNbError, match='no SGLang server given'): preflight([])
