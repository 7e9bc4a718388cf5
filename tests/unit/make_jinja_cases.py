#!/usr/bin/env python3
"""Writes tests/fixtures/jinja/cases.jsonl, what tests/unit/test_jinja.c
checks Poros' Jinja interpreter against: each line a template, its
variables and what jinja2 renders, in the environment transformers renders
chat templates in (trim_blocks, lstrip_blocks, loopcontrols,
raise_exception, tojson with ensure_ascii=False).  A case whose template
raises keeps the message instead ("error").

usage: make_jinja_cases.py > tests/fixtures/jinja/cases.jsonl  (jinja2 3.1)
"""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

VARS = {"xs": [1, 2, 3, 4], "s": "Hello, world!", "u": "日本語テキスト", "d": {"k": "v", "n": 2},
        "ms": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": " ok "}, {"role": "user", "content": "more"}],
        "x": 0, "empty": "", "none_value": None}

CASES = [
    ("whitespace control", "a  {{- 'b' -}}  c\n{%- if true %}\n  x\n{% endif %}\ny"),
    ("trim and lstrip blocks", "  {% if true %}\nyes\n  {% endif %}\nend\n    {%+ if true %}kept{% endif %}"),
    ("loop variables", "{% for v in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}"
                       "/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}:{{ v }};{% endfor %}"),
    ("loop filter", "{% for v in xs if v > 1 %}{{ v }}{{ loop.index }}{{ loop.length }},{% endfor %}"),
    ("loop else", "{% for v in [] %}a{% else %}empty{% endfor %}{% for v in xs %}{% else %}no{% endfor %}"),
    ("break and continue", "{% for v in xs %}{% if v == 2 %}{% continue %}{% endif %}{% if v == 4 %}{% break %}"
                           "{% endif %}{{ v }}{% endfor %}"),
    ("namespace", "{% set ns = namespace(n=0, seen=false) %}{% for v in xs %}{% set ns.n = ns.n + v %}"
                  "{% if v == 3 %}{% set ns.seen = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.seen }}"),
    ("set scoping", "{% set a = 1 %}{% for v in xs %}{% set a = v %}{{ a }}{% endfor %}{{ a }}"
                    "{% if true %}{% set a = 5 %}{% endif %}{{ a }}{% set p, q = 1, 2 %}{{ p }}{{ q }}"),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}"
              "{{ d is mapping }}{{ xs is iterable }}{{ s is iterable }}{{ 3 is equalto 3 }}{{ x is not none }}"
              "{{ 4 is divisibleby 2 }}{{ 3 is odd }}{{ 3 is even }}{{ 1 is number }}{{ 1.5 is float }}"
              "{{ xs is sequence }}{{ d is string }}{{ 'ab' is lower }}{{ true is boolean }}{{ 2 is eq(2) }}"),
    ("filters", "{{ '  hi \n' | trim }}|{{ xs | length }}|{{ s | length }}|{{ u | length }}|{{ xs | first }}"
                "|{{ xs | last }}|{{ y | default('dv') }}|{{ '' | default('e', true) }}|{{ '' | default('e') }}"
                "|{{ 'AbC' | lower }}{{ 'abc' | upper }}|{{ 'a-b-c' | replace('-', '+') }}|{{ xs | join(', ') }}"
                "|{{ 3 | string }}|{{ xs | count }}|{{ 'hello world' | title }}|{{ 'hello' | capitalize }}"
                "|{{ xs | reverse | list }}|{{ '12' | int + 1 }}|{{ -3 | abs }}|{{ u | first }}{{ u | last }}"),
    ("items", "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}{% for k, v in d.items() %}{{ k }}:{{ v }}"
              "{% endfor %}{{ d.keys() | list }}{{ d.values() | list }}{{ d.get('k') }}{{ d.get('z', 'dz') }}"
              "{{ d.get('z') }}"),
    ("string methods", "{{ s.startswith('He') }}{{ s.endswith('!') }}{{ s.startswith(('x', 'H')) }}"
                       "|{{ '  x '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}"
                       "|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ s.replace('l', 'L') }}"
                       "|{{ s.split('l')[-1] }}|{{ 'a b c'.split(' ', 1) }}|{{ s.upper() }}{{ s.lower() }}"
                       "|{{ s.find('o') }}{{ s.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ '\n\nx\n'.strip('\n') }}"),
    ("indexing and slicing", "{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}"
                             "{{ xs[1:3] }}{{ xs[-2:] }}{{ xs[5:] }}{{ xs[3:1:-1] }}|{{ s[1:4] }}{{ s[::-1] }}"
                             "{{ s[-1] }}|{{ u[1:3] }}{{ u[::-1] }}{{ u[-2] }}|{{ d['k'] }}{{ d.k }}{{ xs.0 }}"),
    ("operators", "{{ 'a' in 'cat' }}{{ 2 in xs }}{{ 'k' in d }}{{ 'z' not in d }}{{ 1 ~ 'x' ~ none ~ y }}"
                  "{{ 1 < 2 and not 2 < 1 }}{{ 0 or 'y' }}{{ '' and 1 }}{{ 'a' if false else 'b' }}{{ 'c' if true }}"
                  "{{ 1 + 2 * 3 }}{{ (1 + 2) * 3 }}{{ 7 // 2 }}{{ 7 % 3 }}{{ 7 / 2 }}{{ -3 // 2 }}{{ -7 % 3 }}"
                  "{{ 2 ** 10 }}{{ 'ab' + 'cd' }}{{ xs + [5] }}{{ 'b' > 'a' }}{{ 2 >= 2.0 }}{{ 1 == 1.0 }}"
                  "{{ 'x' != 'y' }}{{ [1, 2] == [1, 2] }}{{ not x }}{{ -x }}{{ 1 - -1 }}"),
    ("tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\n\t\\\\' | tojson }}"
               "|{{ [1, 2.5, true, none, {'a': []}] | tojson }}|{{ ms[0] | tojson(indent=4) }}|{{ [] | tojson(indent=2) }}"),
    ("printing values", "{{ none }}|{{ true }}|{{ [1, 'a', none] }}|{{ {'a': 1, 'b': \"it's\"} }}|{{ 1.0 }}|{{ 0.1 + 0.2 }}"
                        "|{{ 1e20 }}|{{ 2.5e-7 }}|{{ 100.0 / 3 }}|{{ y }}|{{ none_value }}|{{ -0.5 }}"),
    ("comments", "a\n  {# c #}\nb{#- x -#}  c {# y #} d\n{#- z #}\ne"),
    ("select reject map", "{{ xs | reject('equalto', 2) | join(',') }}|{{ xs | select('odd') | list }}"
                          "|{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('/') }}"
                          "|{{ ms | rejectattr('role', 'equalto', 'user') | list | length }}"
                          "|{{ ['a', 'code', 'b'] | reject('equalto', 'code') | join(', ') }}|{{ xs | select | list }}"),
    ("chat loop", "{%- for m in ms %}{%- if loop.first and m.role != 'system' %}<sys>{%- endif %}"
                  "<|{{ m['role'] }}|>\n{{ m.content | trim }}{% if not loop.last %}\n{% endif %}"
                  "{%- endfor %}{%- if add_generation_prompt is defined and add_generation_prompt %}<gen>{% endif %}"),
    ("elif chain", "{% for v in xs %}{% if v == 1 %}one{% elif v == 2 %}two{% elif v == 3 %}three{% else %}many"
                   "{% endif %} {% endfor %}"),
    ("literals", "{% set m = {'a': 1, 'b': [1, 2], \"c\": 'q'} %}{{ m.b[1] }}{{ m.get('z', 'none') }}{{ m['a'] }}"
                 "{{ m.c }}{{ (1, 2) }}{{ ('a' 'b') }}{{ 'it\\'s' }}{{ \"\\u00e9\\n\" }}{{ 1_000 }}{{ True }}{{ None }}"),
    ("undefined things", "{{ d.missing is defined }}{{ d.k }}{{ none_value is none }}{{ empty | length }}"
                         "{% for c in y %}never{% endfor %}{{ y | default('u') }}{{ ms[9] is defined }}"),
    ("messages by index", "{% set loop_messages = ms[1:] %}{% for m in loop_messages %}{{ loop.index0 }}"
                          "{{ ms[loop.index0].role }};{% if loop.index0 > 0 %}{{ loop_messages[loop.index0 - 1].role }}"
                          "{% endif %}{% endfor %}{{ ms[-1]['content'] }}{{ ms | length - 1 }}"),
    ("raise_exception", "{% if ms[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"),
    ("range", "{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(1, 7, 2) %}{{ i }}{% endfor %}"),
    ("nested loops", "{% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}"
                     "{{ loop.index }}{% endfor %}"),
    ("strip unicode whitespace", "[{{ '\u3000\u00a0 x\u2003' | trim }}]"),
    ("one trailing newline dropped", "a\n{% if true %}b{% endif %}\n\n"),
    ("newlines normalized", "a\r\nb\rc{{ 'd\r\ne' }}"),
    ("string escapes", "{{ '\\101\\x42\\u0043\\U00000044\\t|\\d' }}"),
]


def main():
    for name, src in CASES:
        case = {"name": name, "template": src, "vars": VARS}
        try:
            case["expected"] = env.from_string(src).render(**VARS)
        except TemplateError as e:
            case["error"] = str(e)
        sys.stdout.write(json.dumps(case, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
