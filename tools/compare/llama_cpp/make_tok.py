# Byte-level BPE tokenizer with exactly 32768 entries (GPT-2 style pre-tokenizer), trained on
# Python sources (default: this interpreter's standard library; any text works, the tokenizer only
# affects text, not speed); GLM special tokens added so the converter's GLM vocab hook finds them.
# Usage: python make_tok.py OUT_DIR [SOURCE_DIR]   (needs `tokenizers`)
import glob, json, os, sys, sysconfig
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors
src = sys.argv[2] if len(sys.argv) > 2 else sysconfig.get_paths()['stdlib']
files = sorted(glob.glob(os.path.join(src, '**', '*.py'), recursive=True))
sel, total = [], 0
def utf8(path):  # the trainer refuses a file that is not UTF-8 (some stdlib test data is not)
    try:
        open(path, encoding='utf-8').read()
        return True
    except (UnicodeDecodeError, OSError):
        return False
for f in files:
    if not utf8(f): continue
    s = os.path.getsize(f)
    if total + s > 25_000_000: break
    sel.append(f); total += s
print(len(sel), 'files', total, 'bytes', file=sys.stderr)
specials = ['<|endoftext|>', '[gMASK]', '<sop>', '<|user|>', '<|assistant|>', '<|observation|>', '<|system|>']
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
tr = trainers.BpeTrainer(vocab_size=32768, min_frequency=2, special_tokens=specials,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train(sel, tr)
print('vocab', tok.get_vocab_size(), file=sys.stderr)
out = sys.argv[1]
tok.save(os.path.join(out, 'tokenizer.json'))
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": "[gMASK]",
           "pad_token": "<|endoftext|>", "model_max_length": 65536}, open(os.path.join(out, 'tokenizer_config.json'), 'w'), indent=1)
