#include "tokenizer/jinja_parser.h"

#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_lexer.h"

namespace lucid::jinja {
namespace {

[[noreturn]] void ParseFail(const std::string& m, int line) { throw JinjaError{m, line}; }

ExprPtr Make(Expr::Kind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

// Expressions nest at most this deep (parentheses, unary operators, operator and postfix chains):
// the interpreter evaluates them recursively, and `{{ x----...- 1 }}` with thousands of minus
// signs overflowed its stack (found by template_fuzz). Python's own recursion limit stops jinja2
// at about five times this.
constexpr int kMaxNesting = 200;
[[noreturn]] void NestingFail(int line) {
  ParseFail("expression nests deeper than " + std::to_string(kMaxNesting) + " levels", line);
}

// The depth of an expression tree, without recursion (fails past kMaxNesting).
void CheckDepth(const Expr& root) {
  std::vector<std::pair<const Expr*, int>> stack{{&root, 1}};
  while (!stack.empty()) {
    const auto [e, d] = stack.back();
    stack.pop_back();
    if (d > kMaxNesting) NestingFail(e->line);
    for (const Expr* c : {e->a.get(), e->b.get(), e->c.get()})
      if (c) stack.emplace_back(c, d + 1);
    for (const ExprPtr& x : e->items)
      if (x) stack.emplace_back(x.get(), d + 1);
    for (const auto& kw : e->kwargs)
      if (kw.second) stack.emplace_back(kw.second.get(), d + 1);
  }
}

// Recursive-descent expression parser with Jinja2's precedence:
// cond < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filter/test.
class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> toks) : t_(std::move(toks)) {}

  // The parser's own recursion is bounded as it goes (Nest), the tree's depth (which operator
  // and postfix chains grow without recursing) when an outermost expression is complete.
  ExprPtr ParseExpression() {
    Nest nest(this);
    ExprPtr e = ParseExpressionBody();
    if (depth_ == 1) CheckDepth(*e);
    return e;
  }
  ExprPtr ParseExpressionBody() {
    ExprPtr e = ParseOr();
    while (IsName("if")) {
      Next();
      auto c = Make(Expr::Kind::kCond, e->line);
      c->a = ParseOr();
      c->b = std::move(e);
      if (IsName("else")) {
        Next();
        c->c = ParseOr();
      }
      e = std::move(c);
    }
    return e;
  }
  // A comma-separated expression list becomes a tuple (as in `set a, b = ...` values).
  ExprPtr ParseTupleOrExpression() {
    ExprPtr first = ParseExpression();
    if (!IsOp(",")) return first;
    auto t = Make(Expr::Kind::kTuple, first->line);
    t->items.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      if (AtEnd() || IsOp(")")) break;
      t->items.push_back(ParseExpression());
    }
    return t;
  }
  const Token& Peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  Token Next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool AtEnd() const { return Peek().kind == Token::Kind::kEnd; }
  bool IsOp(const char* op, size_t k = 0) const {
    return Peek(k).kind == Token::Kind::kOp && Peek(k).text == op;
  }
  bool IsName(const char* n, size_t k = 0) const {
    return Peek(k).kind == Token::Kind::kName && Peek(k).text == n;
  }
  void Expect(const char* op) {
    if (!IsOp(op))
      ParseFail(std::string("expected '") + op + "', got '" + Peek().text + "'", Peek().line);
    Next();
  }
  std::string ExpectName() {
    if (Peek().kind != Token::Kind::kName)
      ParseFail("expected a name, got '" + Peek().text + "'", Peek().line);
    return Next().text;
  }
  void ExpectEnd() {
    if (!AtEnd()) ParseFail("unexpected '" + Peek().text + "'", Peek().line);
  }
  // Parses "(args)" after the opening parenthesis was consumed.
  void ParseCallArgs(Expr* call) {
    while (!IsOp(")")) {
      if (Peek().kind == Token::Kind::kName && IsOp("=", 1)) {
        std::string k = Next().text;
        Next();
        call->kwargs.emplace_back(k, ParseExpression());
      } else {
        call->items.push_back(ParseExpression());
      }
      if (!IsOp(",")) break;
      Next();
    }
    Expect(")");
  }
  // Filter name and optional arguments, applied to `target` (may be null for filter blocks).
  ExprPtr ParseFilterCall(ExprPtr target) {
    auto f = Make(Expr::Kind::kFilter, Peek().line);
    f->name = ExpectName();
    while (IsOp(".")) {  // dotted filter names
      Next();
      f->name += "." + ExpectName();
    }
    f->a = std::move(target);
    if (IsOp("(")) {
      Next();
      ParseCallArgs(f.get());
    }
    return f;
  }

 private:
  struct Nest {
    explicit Nest(ExprParser* p) : p_(p) {
      if (++p_->depth_ > kMaxNesting) NestingFail(p_->Peek().line);
    }
    ~Nest() { --p_->depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    ExprParser* p_;
  };
  ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = Make(Expr::Kind::kBinary, a->line);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }
  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) {
      Next();
      e = Binary("or", std::move(e), ParseAnd());
    }
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      Next();
      e = Binary("and", std::move(e), ParseNot());
    }
    return e;
  }
  ExprPtr ParseNot() {
    if (IsName("not")) {
      Nest nest(this);
      const int line = Next().line;
      auto e = Make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->a = ParseNot();
      return e;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr e = ParseMath1();
    static const std::set<std::string> kCmp = {"==", "!=", "<", ">", "<=", ">="};
    while (true) {
      std::string op;
      if (Peek().kind == Token::Kind::kOp && kCmp.count(Peek().text)) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      e = Binary(op, std::move(e), ParseMath1());
    }
    return e;
  }
  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = Next().text;
      e = Binary(op, std::move(e), ParseConcat());
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (IsOp("~")) {
      Next();
      e = Binary("~", std::move(e), ParseMath2());
    }
    return e;
  }
  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = Next().text;
      e = Binary(op, std::move(e), ParsePow());
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (IsOp("**")) {
      Next();
      e = Binary("**", std::move(e), ParseUnary(true));
    }
    return e;
  }
  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      Nest nest(this);
      const Token op = Next();
      e = Make(Expr::Kind::kUnary, op.line);
      e->name = op.text;
      e->a = ParseUnary(false);
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }
  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        Next();
        auto a = Make(Expr::Kind::kAttr, e->line);
        a->a = std::move(e);
        if (Peek().kind == Token::Kind::kInt) {  // foo.0 is foo[0]
          a->kind = Expr::Kind::kItem;
          a->b = Make(Expr::Kind::kLiteral, a->line);
          a->b->value = Value(static_cast<int64_t>(std::atoll(Next().text.c_str())));
        } else {
          a->name = ExpectName();
        }
        e = std::move(a);
      } else if (IsOp("[")) {
        Next();
        e = ParseSubscript(std::move(e));
      } else if (IsOp("(")) {
        Next();
        auto c = Make(Expr::Kind::kCall, e->line);
        c->a = std::move(e);
        ParseCallArgs(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr ParseSubscript(ExprPtr target) {
    ExprPtr parts[3];
    int n = 0;
    bool is_slice = false;
    while (true) {
      if (!IsOp(":") && !IsOp("]")) parts[n] = ParseExpression();
      if (IsOp(":") && n < 2) {
        Next();
        is_slice = true;
        ++n;
        continue;
      }
      break;
    }
    Expect("]");
    if (!is_slice) {
      if (!parts[0]) ParseFail("empty subscript", target->line);
      auto e = Make(Expr::Kind::kItem, target->line);
      e->a = std::move(target);
      e->b = std::move(parts[0]);
      return e;
    }
    auto e = Make(Expr::Kind::kSlice, target->line);
    e->a = std::move(target);
    e->items.resize(3);
    for (int k = 0; k < 3; ++k) e->items[k] = std::move(parts[k]);
    return e;
  }
  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        Next();
        e = ParseFilterCall(std::move(e));
      } else if (IsName("is")) {
        Next();
        auto t = Make(Expr::Kind::kTest, e->line);
        if (IsName("not")) {
          Next();
          t->negated = true;
        }
        t->name = ExpectName();
        t->a = std::move(e);
        if (IsOp("(")) {
          Next();
          ParseCallArgs(t.get());
        } else if (StartsTestArgument()) {
          t->items.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        Next();
        auto c = Make(Expr::Kind::kCall, e->line);
        c->a = std::move(e);
        ParseCallArgs(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  bool StartsTestArgument() const {
    const Token& p = Peek();
    if (p.kind == Token::Kind::kName) {
      static const std::set<std::string> kStop = {"else", "or", "and", "if", "in", "not", "is"};
      return kStop.count(p.text) == 0;
    }
    return p.kind == Token::Kind::kString || p.kind == Token::Kind::kInt ||
           p.kind == Token::Kind::kFloat || IsOp("[") || IsOp("{");
  }
  ExprPtr ParsePrimary() {
    const Token tok = Next();
    auto lit = [&](Value v) {
      auto e = Make(Expr::Kind::kLiteral, tok.line);
      e->value = std::move(v);
      return e;
    };
    switch (tok.kind) {
      case Token::Kind::kName:
        if (tok.text == "true" || tok.text == "True") return lit(Value(true));
        if (tok.text == "false" || tok.text == "False") return lit(Value(false));
        if (tok.text == "none" || tok.text == "None") return lit(Value::None());
        {
          auto e = Make(Expr::Kind::kName, tok.line);
          e->name = tok.text;
          return e;
        }
      case Token::Kind::kInt:
        return lit(Value(static_cast<int64_t>(std::strtoll(tok.text.c_str(), nullptr, 10))));
      case Token::Kind::kFloat:
        return lit(Value(std::strtod(tok.text.c_str(), nullptr)));
      case Token::Kind::kString: {
        std::string s = tok.text;
        while (Peek().kind == Token::Kind::kString) s += Next().text;  // implicit concatenation
        return lit(Value(s));
      }
      case Token::Kind::kOp:
        if (tok.text == "(") return ParseParen(tok.line);
        if (tok.text == "[") {
          auto e = Make(Expr::Kind::kList, tok.line);
          while (!IsOp("]")) {
            e->items.push_back(ParseExpression());
            if (!IsOp(",")) break;
            Next();
          }
          Expect("]");
          return e;
        }
        if (tok.text == "{") {
          auto e = Make(Expr::Kind::kDict, tok.line);
          while (!IsOp("}")) {
            e->items.push_back(ParseExpression());
            Expect(":");
            e->items.push_back(ParseExpression());
            if (!IsOp(",")) break;
            Next();
          }
          Expect("}");
          return e;
        }
        break;
      default:
        break;
    }
    ParseFail("unexpected '" + tok.text + "'", tok.line);
  }
  ExprPtr ParseParen(int line) {
    if (IsOp(")")) {
      Next();
      return Make(Expr::Kind::kTuple, line);
    }
    ExprPtr e = ParseExpression();
    if (IsOp(")")) {
      Next();
      return e;
    }
    auto t = Make(Expr::Kind::kTuple, line);
    t->items.push_back(std::move(e));
    while (IsOp(",")) {
      Next();
      if (IsOp(")")) break;
      t->items.push_back(ParseExpression());
    }
    Expect(")");
    return t;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;  // Nest levels open
};

// Statement parser over the segment list.
class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  // Parses statements until one of `ends` (a block keyword) is reached; returns that keyword
  // (with its parser positioned after the keyword) or "" at the end of input.
  std::string ParseBody(Body* body, const std::set<std::string>& ends, ExprParser** end_tag) {
    while (pos_ < segs_.size()) {
      const Segment& seg = segs_[pos_++];
      if (seg.kind == Segment::Kind::kText) {
        auto s = NewStmt(Stmt::Kind::kText, seg.line);
        s->text = seg.text;
        body->push_back(std::move(s));
        continue;
      }
      current_ = std::make_unique<ExprParser>(TokenizeExpression(seg.text, seg.line));
      ExprParser& p = *current_;
      if (seg.kind == Segment::Kind::kOutput) {
        auto s = NewStmt(Stmt::Kind::kOutput, seg.line);
        s->expr = p.ParseTupleOrExpression();
        p.ExpectEnd();
        body->push_back(std::move(s));
        continue;
      }
      const std::string kw = p.ExpectName();
      if (ends.count(kw)) {
        *end_tag = current_.release();
        return kw;
      }
      body->push_back(ParseStatement(kw, seg.line));
    }
    if (!ends.empty()) {
      ParseFail("unexpected end of template, expected '" + *ends.begin() + "'",
                segs_.empty() ? 1 : segs_.back().line);
    }
    return "";
  }

 private:
  std::unique_ptr<Stmt> NewStmt(Stmt::Kind k, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }
  // Parses a body up to one of `ends`; returns the end keyword and its tag parser.
  std::pair<std::string, std::unique_ptr<ExprParser>> Block(Body* body,
                                                            const std::set<std::string>& ends) {
    ExprParser* tag = nullptr;
    std::string kw = ParseBody(body, ends, &tag);
    return {kw, std::unique_ptr<ExprParser>(tag)};
  }
  std::unique_ptr<Stmt> ParseStatement(const std::string& kw, int line) {
    ExprParser& p = *current_;
    if (kw == "if") return ParseIf(line);
    if (kw == "for") return ParseFor(line);
    if (kw == "set") return ParseSet(line);
    if (kw == "macro") return ParseMacro(line);
    if (kw == "call") return ParseCall(line);
    if (kw == "filter") {
      auto s = NewStmt(Stmt::Kind::kFilterBlock, line);
      s->expr = p.ParseFilterCall(nullptr);
      while (p.IsOp("|")) {
        p.Next();
        s->expr = p.ParseFilterCall(std::move(s->expr));
      }
      p.ExpectEnd();
      Block(&s->body, {"endfilter"}).second->ExpectEnd();
      return s;
    }
    if (kw == "generation") {  // transformers' assistant-mask tag: renders its body
      p.ExpectEnd();
      auto s = NewStmt(Stmt::Kind::kIf, line);
      auto t = std::make_unique<Expr>();
      t->kind = Expr::Kind::kLiteral;
      t->value = Value(true);
      s->conds.push_back(std::move(t));
      s->bodies.emplace_back();
      Block(&s->bodies.back(), {"endgeneration"}).second->ExpectEnd();
      return s;
    }
    if (kw == "break" || kw == "continue") {
      p.ExpectEnd();
      return NewStmt(kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line);
    }
    ParseFail("unknown statement '" + kw + "'", line);
  }
  std::unique_ptr<Stmt> ParseIf(int line) {
    auto s = NewStmt(Stmt::Kind::kIf, line);
    s->conds.push_back(current_->ParseTupleOrExpression());
    current_->ExpectEnd();
    while (true) {
      s->bodies.emplace_back();
      auto [kw, tag] = Block(&s->bodies.back(), {"elif", "else", "endif"});
      if (kw == "elif") {
        s->conds.push_back(tag->ParseTupleOrExpression());
        tag->ExpectEnd();
        continue;
      }
      tag->ExpectEnd();
      if (kw == "else") Block(&s->else_body, {"endif"}).second->ExpectEnd();
      return s;
    }
  }
  std::vector<std::string> ParseTargets(ExprParser& p) {
    std::vector<std::string> names;
    const bool paren = p.IsOp("(");
    if (paren) p.Next();
    names.push_back(p.ExpectName());
    while (p.IsOp(",")) {
      p.Next();
      names.push_back(p.ExpectName());
    }
    if (paren) p.Expect(")");
    return names;
  }
  std::unique_ptr<Stmt> ParseFor(int line) {
    ExprParser& p = *current_;
    auto s = NewStmt(Stmt::Kind::kFor, line);
    s->targets = ParseTargets(p);
    if (!p.IsName("in")) ParseFail("expected 'in' in for loop", line);
    p.Next();
    s->expr = p.ParseTupleOrExpression();  // `if` filter is parsed as a conditional: undo below
    if (s->expr->kind == Expr::Kind::kCond && !s->expr->c) {
      s->cond = std::move(s->expr->a);
      s->expr = std::move(s->expr->b);
    }
    if (p.IsName("recursive")) ParseFail("recursive for loops are not supported", line);
    p.ExpectEnd();
    auto [kw, tag] = Block(&s->body, {"else", "endfor"});
    tag->ExpectEnd();
    if (kw == "else") Block(&s->else_body, {"endfor"}).second->ExpectEnd();
    return s;
  }
  std::unique_ptr<Stmt> ParseSet(int line) {
    ExprParser& p = *current_;
    auto s = NewStmt(Stmt::Kind::kSet, line);
    if (p.Peek().kind == Token::Kind::kName && p.IsOp(".", 1)) {
      s->targets.push_back(p.ExpectName());
      p.Next();
      s->targets.push_back(p.ExpectName());
      s->attr_target = true;
    } else {
      s->targets = ParseTargets(p);
    }
    if (p.AtEnd() && s->targets.size() == 1 && !s->attr_target) {
      s->kind = Stmt::Kind::kSetBlock;
      Block(&s->body, {"endset"}).second->ExpectEnd();
      return s;
    }
    p.Expect("=");
    s->expr = p.ParseTupleOrExpression();
    p.ExpectEnd();
    return s;
  }
  void ParseParams(ExprParser& p, Stmt* s) {
    p.Expect("(");
    while (!p.IsOp(")")) {
      std::string name = p.ExpectName();
      ExprPtr def;
      if (p.IsOp("=")) {
        p.Next();
        def = p.ParseExpression();
      }
      s->params.emplace_back(name, std::move(def));
      if (!p.IsOp(",")) break;
      p.Next();
    }
    p.Expect(")");
  }
  std::unique_ptr<Stmt> ParseMacro(int line) {
    ExprParser& p = *current_;
    auto s = NewStmt(Stmt::Kind::kMacro, line);
    s->name = p.ExpectName();
    ParseParams(p, s.get());
    p.ExpectEnd();
    Block(&s->body, {"endmacro"}).second->ExpectEnd();
    return s;
  }
  std::unique_ptr<Stmt> ParseCall(int line) {
    ExprParser& p = *current_;
    auto s = NewStmt(Stmt::Kind::kCallBlock, line);
    if (p.IsOp("(")) ParseParams(p, s.get());
    s->expr = p.ParseExpression();
    if (s->expr->kind != Expr::Kind::kCall) ParseFail("call block needs a call expression", line);
    p.ExpectEnd();
    Block(&s->body, {"endcall"}).second->ExpectEnd();
    return s;
  }

  std::vector<Segment> segs_;
  size_t pos_ = 0;
  std::unique_ptr<ExprParser> current_;
};

}  // namespace

std::unique_ptr<Template> ParseTemplate(const std::string& source) {
  StmtParser parser(SplitTemplate(source));
  auto t = std::make_unique<Template>();
  ExprParser* unused = nullptr;
  parser.ParseBody(&t->body, {}, &unused);
  return t;
}

}  // namespace lucid::jinja
