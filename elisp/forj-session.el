;;; forj-session.el --- What a chat knows, apart from how it is shown  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; A chat's session: one `forj-session' record holding what the chat
;; knows (its project, provider, the worker's tools, the record of the
;; conversation, where the turn stands, the batch or reply under way),
;; held by the chat buffer in the buffer-local `forj-session'.
;;
;; The chat buffer is only a view of its session: forj-loop.el sends,
;; streams and runs batches by changing the session, and tells the view
;; what to draw through the session's view function.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-worker)
(require 'forj-tools)
(require 'forj-review)
(require 'forj-provider)
(require 'forj-instructions)

;;; The session

(cl-defstruct (forj-session (:constructor forj-session-create)
                            (:copier nil))
  "What a chat knows."
  (id nil :documentation "The chat's id: names its saved copy and starts its turn ids.")
  (root nil :documentation "The project root.")
  (root-confirmed nil :documentation "Non-nil once the root is known to be the user's choice.")
  (provider nil :documentation "The provider plist.")
  (tools nil :documentation "The worker's tool definitions for the chat's permission mode.")
  (families nil :documentation "The families of tools loaded beyond the core set (strings).
The model loads one with the tool load_tools, or by calling one of its
tools; see `forj-chat-tool-set'.")
  (family-index nil :documentation "Each family's tools, as the worker last said: a plist.
Tells which family a call to a tool not offered belongs to.")
  (permission-instructions
   nil :documentation "Sentences the worker's rules add to the model's instructions.")
  (greeted nil :documentation "The worker whose hello warnings the chat has shown.")
  (record nil :documentation "The conversation: a list of entries (:role ROLE :text TEXT).
ROLE is \"meta\" (the first line), \"notice\", \"user\", \"assistant\"
or \"tool\"; TEXT is the entry's part of the transcript, exactly.  What
the model reads is parsed from the concatenated texts.")
  (state 'idle :documentation "What the chat is doing: `idle', `streaming' or `tools'.")
  (turn 0 :documentation "Counts sends and stops.
A callback of an older turn finds it changed and does nothing.")
  (turn-id nil :documentation "The id of the user message being answered (the turn), or nil.")
  (turn-state nil :documentation "(TURN . STATE): what the worker last said of the turn TURN.
STATE is the `turn' of an execute reply (before_exit, exit_loop,
continue_loop, instructions).")
  (iterations 0 :documentation "Tool batches run for the current user message.")
  (limit nil :documentation "This chat's limit of tool batches per user message, or nil.
nil: `forj-chat-max-tool-iterations', else the worker's configuration.")
  (unbounded nil :documentation "Non-nil when this turn may run tools until it is done.
Set by `forj-continue-to-end'; a new turn starts bounded again.")
  (capped nil :documentation "Non-nil once the iteration cap answered a batch.")
  (cancelled nil :documentation "Non-nil once the user stopped the turn.")
  (stream nil :documentation "The provider request under way, if any.")
  (reply nil :documentation "The text of the reply being streamed so far, or nil.")
  (stop-info nil :documentation "Why the reply being streamed ended early, as its provider said.")
  (batch nil :documentation "The tool batch running, if any.")
  (continuation nil :documentation "What `forj-continue' does: nil, or (:kind KIND :text TEXT).")
  (held-notices nil :documentation "Notices that arrived while a reply streamed (newest first).")
  (view-function nil :documentation "The chat's view: see `forj-session-view'."))

(defvar-local forj-session nil
  "The session of this chat buffer, or nil outside a chat.")
(put 'forj-session 'permanent-local t)

(defun forj-session-renew (&optional old)
  "A fresh session with the id and the record of OLD, if any.
A chat whose mode starts again keeps only these, as a buffer keeps its
permanent local variables."
  (forj-session-create :id (and old (forj-session-id old))
                       :record (and old (forj-session-record old))))

(defun forj-session-view (event &rest args)
  "Tell this chat's view of EVENT, with ARGS; return the view's answer.
Without a view (the session is driven without a buffer to draw in),
nothing happens and the value is nil.  The events:

  entry ENTRY         the record's ENTRY was added: draw it last
  user-message ENTRY DRAFT
                      the user's message ENTRY was added: draw it and
                      a fresh prompt holding DRAFT
  redraw DRAFT        the record changed: draw it all again, with DRAFT
                      in the input (nil: the input as it is)
  draft               return the text in the input
  set-draft TEXT      put TEXT in the input instead
  input               return the marker where the input starts
  reply-start         a reply begins: draw its heading
  reply-text TEXT     the reply being streamed goes on with TEXT
  reply-end ENTRY     the reply is complete as the record's ENTRY
  wait SECONDS ATTEMPT MESSAGE
                      the provider is retried in SECONDS, after MESSAGE
  wait-over           no retry is waited for any more
  results-start       a tool results section begins
  output              return the marker where a batch is drawn
  output-to POS       what is drawn now ends at POS
  insert TEXT         draw TEXT after what is drawn
  results-end ENTRY   the results section is complete as ENTRY
  results-discard     take the results section away: it is not recorded
  context             the chat's context list changed
  turn-end            the turn is over: no reply streams any more, and
                      no retry is waited for"
  (let ((view (and forj-session (forj-session-view-function forj-session))))
    (and view (apply view event args))))

(defun forj-session-show (entry)
  "Have the view draw the record's ENTRY, just added; return ENTRY."
  (forj-session-view 'entry entry)
  entry)

(defun forj-session-draft ()
  "The text in this chat's input, not sent yet (\"\" without a view)."
  (or (forj-session-view 'draft) ""))

(defun forj-session-current-root ()
  "The project root of this buffer's session, or nil outside a chat."
  (and forj-session (forj-session-root forj-session)))

;;; Options

(defcustom forj-chat-tools-mode 'enabled
  "How the chat handles the model's tool calls.
`enabled': validate, review and execute them, then resume the model.
`parse-only': list them as pending; nothing runs until the user gives
each its result with `forj-tool-result'.
`disabled': advertise no tools; calls are answered as invalid."
  :type '(choice (const :tag "Enabled" enabled)
                 (const :tag "Parse only" parse-only)
                 (const :tag "Disabled" disabled))
  :group 'forj)

(defcustom forj-chat-extra-instructions nil
  "Text added to the end of the system prompt, or nil."
  :type '(choice (const :tag "None" nil) string)
  :group 'forj)

;;; Ids

(defvar forj-chat-record-changed-hook nil
  "Run in a chat buffer after its record changed (an entry added, or cut back).")

(defun forj-session-ensure-id ()
  "This chat's id, made on first use: a timestamp and random hex."
  (or (forj-session-id forj-session)
      (setf (forj-session-id forj-session) (format "%s-%s" (format-time-string "%Y%m%dT%H%M%S")
                                                   (substring (secure-hash 'sha256 (format "%s%s%s" (random) (float-time)
                                                                                           (emacs-pid)))
                                                              0 8)))))

(defun forj-session-new-turn-id ()
  "A new turn id for a user message of this chat (also continue and retry)."
  (format "%s.%s" (forj-session-ensure-id)
          (substring (secure-hash 'sha256 (format "%s%s%s" (random) (float-time)
                                                  (length (forj-session-record forj-session))))
                     0 8)))

;;; The transcript

(defconst forj-session-heading-re "^## \\(User\\|Assistant\\|Tool results\\)$"
  "A role heading line.")

(defconst forj-session-notice-prefix "⚠ forj: "
  "The start of a notice line.")

(defconst forj-session--escaped-line-re
  (concat "^\\(" (substring forj-session-heading-re 1) "\\|" forj-session-notice-prefix "\\)")
  "A line that forj escapes in what the model or the user writes.")

(defun forj-session-escape (text)
  "TEXT with its role heading and notice lines escaped by a backslash.
Only forj writes headings that divide the record, and notices."
  (replace-regexp-in-string forj-session--escaped-line-re "\\\\\\&" text))

(defun forj-session-unescape (text)
  "TEXT with the escapes of `forj-session-escape' taken out."
  (replace-regexp-in-string (concat "^\\\\" (substring forj-session--escaped-line-re 1)) "\\1" text))

(defun forj-session-split-heading (text)
  "TEXT of an entry as (HEADING-LINE . REST), REST after the heading's newline."
  (if (string-match (concat "\\`\n?\\(" (substring forj-session-heading-re 1) "\\)\n?") text)
      (cons (match-string 1 text) (substring text (match-end 0)))
    (cons nil text)))

(defun forj-session--heading-lines (beg end)
  "The role heading lines between BEG and END.
A list of (ROLE LINE-START LINE-END).
Code blocks do not hide headings: a reply cut inside a code block must
not swallow the rest of the record.  Heading lines that the model or
the user write are escaped instead (`forj-session-escape')."
  (save-excursion
    (goto-char beg)
    (let ((found nil))
      (while (re-search-forward forj-session-heading-re end t)
        (push (list (pcase (match-string-no-properties 1)
                      ("User" "user") ("Assistant" "assistant") (_ "tool"))
                    (match-beginning 0) (match-end 0))
              found))
      (nreverse found))))

(defun forj-session--sections (&optional end)
  "The chat's sections up to END: a list of (ROLE BEG END)."
  (let* ((end (or end (point-max)))
         (headings (forj-session--heading-lines (point-min) end)))
    (cl-loop for (heading . rest) on headings
             collect (list (nth 0 heading)
                           (min end (1+ (nth 2 heading)))
                           (if rest (nth 1 (car rest)) end)))))

(defun forj-session-text-of (text)
  "TEXT without notice lines, trimmed."
  (string-trim (replace-regexp-in-string (concat "^" forj-session-notice-prefix ".*\n?") "" text)))

(defun forj-session--text (beg end)
  "The text between BEG and END without notices, trimmed."
  (string-trim
   (replace-regexp-in-string
    (concat "^" forj-session-notice-prefix ".*\n?") ""
    (buffer-substring-no-properties beg end))))

(defun forj-session-blocks (beg end info)
  "The contents of the fenced blocks with INFO between BEG and END."
  (save-excursion
    (goto-char beg)
    (let ((found nil))
      (while (re-search-forward (concat "^```" info "[ \t]*$") end t)
        (let ((start (1+ (point))))
          (when (re-search-forward "^```[ \t]*$" end t)
            (push (buffer-substring-no-properties start (match-beginning 0)) found))))
      (nreverse found))))

(defun forj-session-transcript (&optional record)
  "The transcript of RECORD (default: this chat's record)."
  (mapconcat (lambda (entry) (plist-get entry :text)) (or record (forj-session-record forj-session)) ""))

(defun forj-session-split (text)
  "Split the transcript TEXT into record entries and the draft after its prompt.
Return (ENTRIES . DRAFT).  The last \"## User\" section is the prompt."
  (with-temp-buffer
    (insert text)
    (let* ((headings (forj-session--heading-lines (point-min) (point-max)))
           (prompt (let ((last (car (last headings)))) (and (equal (car last) "user") last)))
           (sections (if prompt (butlast headings) headings))
           ;; A user or results heading owns the newline before it.
           (cut (lambda (heading) (if (member (car heading) '("user" "tool"))
                                      (max (point-min) (1- (nth 1 heading)))
                                    (nth 1 heading))))
           (end (if prompt (funcall cut prompt) (point-max)))
           (entries nil)
           (from (point-min))
           (role "meta"))
      (dolist (heading sections)
        (let ((bound (funcall cut heading)))
          (when (> bound from)
            (push (list :role role :text (buffer-substring-no-properties from bound)) entries))
          (setq from bound role (car heading))))
      (when (> end from)
        (push (list :role role :text (buffer-substring-no-properties from end)) entries))
      (cons (nreverse entries)
            (if prompt
                (let ((draft (buffer-substring-no-properties (min (point-max) (1+ (nth 2 prompt))) (point-max))))
                  (if (string-prefix-p "\n" draft) (substring draft 1) draft))
              "")))))

;;; Changing the record

(defun forj-session-record-add (role text)
  "Add an entry of ROLE with TEXT at the end of the record; return it."
  (let ((entry (list :role role :text text)))
    (setf (forj-session-record forj-session) (append (forj-session-record forj-session) (list entry)))
    (run-hooks 'forj-chat-record-changed-hook)
    entry))

(defun forj-session-record-add-user (text turn)
  "Add the user's message TEXT, the start of TURN, to the record; return it.
The entry keeps its turn id and time: checkpoints and rewind name them."
  (let ((forj-chat-record-changed-hook nil))
    (forj-session-record-add "user" text))
  (let ((entry (car (last (forj-session-record forj-session)))))
    (nconc entry (list :turn turn :time (float-time)))
    (run-hooks 'forj-chat-record-changed-hook)
    entry))

(defun forj-session-cut-record (index draft)
  "Cut the record just before its entry at INDEX; put DRAFT in the input.
An answer still due to the old turn is ignored from now on."
  (setf (forj-session-record forj-session) (cl-subseq (forj-session-record forj-session) 0 index))
  (cl-incf (forj-session-turn forj-session))
  (forj-session-view 'redraw draft)
  (run-hooks 'forj-chat-record-changed-hook))

;;; Notices

(defun forj-session-notice (text)
  "Show TEXT as a notice line in the chat, just before the prompt.
A notice is kept in the record (and saved) but never sent to the model.
While a reply streams or tools run, it waits until they are done: the
record keeps the order in which the view shows things."
  (let ((line (concat forj-session-notice-prefix
                      (substring-no-properties
                       (forj-review-mark-invisible (replace-regexp-in-string "\n" " " text)))
                      "\n")))
    (if (or (forj-session-reply forj-session) (eq (forj-session-state forj-session) 'tools))
        (push line (forj-session-held-notices forj-session))
      (forj-session--add-notice line))))

(defun forj-session--add-notice (line)
  "Add the notice LINE to the record and the view."
  (let ((transcript (forj-session-transcript)))
    (forj-session-show
     (forj-session-record-add "notice" (concat (if (or (string-empty-p transcript)
                                                       (string-suffix-p "\n" transcript))
                                                   ""
                                                 "\n")
                                               line)))))

(defun forj-session-flush-notices ()
  "Show the notices held while a reply streamed."
  (let ((held (reverse (forj-session-held-notices forj-session))))
    (setf (forj-session-held-notices forj-session) nil)
    (mapc #'forj-session--add-notice held)))

(defun forj-session-choose-provider ()
  "The provider to use; with none configured, say how to set one, and return nil."
  (or (forj-provider-pick)
      (progn
        (forj-session-notice
         (format "no language model is set up yet.  M-x forj-setup: choose a provider and paste its key (stored through auth-source), or give a local server's URL (Ollama, llama.cpp).  M-x forj-demo: a recorded session on a sample project, with no key and no network.  (Keys are also read from %s.)"
                 (string-join (forj-provider-key-variables) ", ")))
        nil)))

;;; The worker and the modes

(defun forj-session-hello ()
  "The hello reply of this chat's running worker, or nil."
  (let ((worker (and (forj-session-root forj-session) (forj-worker-get (forj-session-root forj-session)))))
    (and worker (forj-worker-hello worker))))

(defun forj-session-permission-mode ()
  "The permission mode of this chat, as text.
Its own (`forj-set-mode'), else the worker's configured default, else
\"ask\" until the worker has said."
  (or forj-tools-permission-mode
      (plist-get (plist-get (forj-session-hello) :permissions) :mode)
      "ask"))

(defun forj-session-effective-tools-mode ()
  "The tools mode in force: the stricter of the chat's and the worker's.
The chat's is `forj-chat-tools-mode'; the worker's is `[tools] mode'
of its configuration."
  (let* ((order '(disabled parse-only enabled))
         (configured (plist-get (plist-get (plist-get (plist-get (forj-session-hello) :config) :effective)
                                           :tools)
                                :mode))
         (theirs (pcase configured ("disabled" 'disabled) ("parse_only" 'parse-only) (_ 'enabled)))
         (ours (if (memq forj-chat-tools-mode order) forj-chat-tools-mode 'enabled)))
    (if (< (cl-position theirs order) (cl-position ours order)) theirs ours)))

(defun forj-session-native-p ()
  "Return non-nil when this chat talks to the model through native functions."
  (and (plist-get (forj-session-provider forj-session) :native-tools)
       (not (eq (forj-session-effective-tools-mode) 'disabled))))

;;; What the model reads

(defun forj-session-messages-of (&optional record)
  "The messages for the model of RECORD (default: this chat's record).
Provider-neutral, and without the chat's context and compaction: see
`forj-loop-messages'."
  (let ((native (forj-session-native-p))
        (transcript (forj-session-transcript record)))
    (with-temp-buffer
      (insert transcript)
      (forj-session--parse-messages native))))

(defun forj-session--parse-messages (native)
  "The messages of the transcript in the current buffer.
NATIVE non-nil reads tool-call blocks as native calls."
  (let ((messages nil)
        (last-calls nil))
    (dolist (section (forj-session--sections))
      (pcase-let ((`(,role ,beg ,send) section))
        (pcase role
          ("user"
           (let ((text (forj-session--text beg send)))
             (unless (string-empty-p text) (push (list :role "user" :text text) messages))))
          ("assistant"
           (let* ((entries (and native (forj-tools-parse-region beg send)))
                  (calls (delq nil (mapcar (lambda (e) (plist-get e :call)) entries)))
                  (text (if native
                            (forj-session--without-blocks beg send entries)
                          (forj-session--text beg send))))
             (setq last-calls calls)
             (unless (and (string-empty-p text) (null calls))
               (push (list :role "assistant" :text text :calls calls) messages))))
          ("tool"
           (let ((blocks (forj-session-blocks beg send "tool-result")))
             (if (not native)
                 (when blocks
                   (push (list :role "user"
                               :text (mapconcat (lambda (b) (concat "```tool-result\n" b "```")) blocks "\n"))
                         messages))
               (forj-session--native-results blocks last-calls (lambda (m) (push m messages)))))))))
    (forj-session--drop-unanswered (nreverse messages))))

(defun forj-session--without-blocks (beg end entries)
  "The text between BEG and END without the tool-call blocks of ENTRIES."
  (let ((pieces nil) (from beg))
    (dolist (entry entries)
      (when (plist-get entry :call)
        (push (buffer-substring-no-properties from (plist-get entry :beg)) pieces)
        (setq from (plist-get entry :end))))
    (push (buffer-substring-no-properties from end) pieces)
    (with-temp-buffer
      (insert (apply #'concat (nreverse pieces)))
      (forj-session--text (point-min) (point-max)))))

(defun forj-session--native-results (blocks last push)
  "Give PUSH the messages for result BLOCKS that answer the list LAST.
LAST holds the native calls of the reply before.  Their results
become one tool message; any other result (of a block that was not
a call) goes as user text."
  (let ((ids (mapcar (lambda (c) (plist-get c :id)) last))
        (results nil) (others nil))
    (dolist (block blocks)
      (let ((json (ignore-errors (forj-tools-json-decode block))))
        (if (and json (member (plist-get json :id) ids))
            (push (list :id (plist-get json :id) :name (plist-get json :name)
                        :content (string-trim block))
                  results)
          (push (concat "```tool-result\n" block "```") others))))
    (when results (funcall push (list :role "tool" :results (nreverse results))))
    (when others (funcall push (list :role "user" :text (string-join (nreverse others) "\n"))))))

(defun forj-session--drop-unanswered (messages)
  "Drop from MESSAGES each native call left without a result.
Providers refuse a call left unanswered (a stopped turn leaves some)."
  (cl-loop for (message . rest) on messages
           collect (if (and (equal (plist-get message :role) "assistant") (plist-get message :calls))
                       (let* ((next (car rest))
                              (answered (and (equal (plist-get next :role) "tool")
                                             (mapcar (lambda (r) (plist-get r :id))
                                                     (plist-get next :results)))))
                         (plist-put (copy-sequence message) :calls
                                    (cl-remove-if-not (lambda (c) (member (plist-get c :id) answered))
                                                      (plist-get message :calls))))
                     message)))

(defun forj-session-entry-calls (entry)
  "The tool-call blocks of the record's ENTRY, parsed in the transcript.
Line numbers in error messages count from the start of the transcript."
  (let* ((before (forj-session-transcript (cl-subseq (forj-session-record forj-session) 0
                                                     (cl-position entry (forj-session-record forj-session)))))
         (text (plist-get entry :text)))
    (with-temp-buffer
      (insert before text)
      (forj-tools-parse-region (+ 1 (length before) (length "## Assistant\n\n")) (point-max)))))

(defun forj-session-calls-before (entry)
  "Map each id to its tool call, for the reply before the record's ENTRY."
  (let* ((position (cl-position entry (forj-session-record forj-session)))
         (reply (cl-find "assistant" (reverse (cl-subseq (forj-session-record forj-session) 0 position))
                         :key (lambda (e) (plist-get e :role)) :test #'equal)))
    (when reply
      (with-temp-buffer
        (insert (plist-get reply :text))
        (delq nil (mapcar (lambda (e) (let ((call (plist-get e :call)))
                                        (and call (cons (plist-get call :id) call))))
                          (forj-tools-parse-region (point-min) (point-max))))))))

(defun forj-session-results-text (entries results)
  "The transcript of the tool results section of ENTRIES and their RESULTS."
  (concat "\n## Tool results\n\n"
          (cl-loop for entry in entries
                   for result in results
                   concat (concat (forj-tools-header-text entry result) "\n"
                                  (if result
                                      (concat "```tool-result\n" (forj-tools-json-encode result) "\n```\n")
                                    "")))
          "\n"))

;;; The system prompt

(defun forj-session-system-prompt ()
  "The system prompt for this chat: the tools, the protocol, the rules."
  (let ((root (forj-session-root forj-session))
        (tools (append (forj-session-tools forj-session) nil)))
    (concat
     "You are forj, a coding agent working inside Emacs with a user on the project at "
     root ".  Answer in Markdown.\n\n"
     (cond
      ((eq (forj-session-effective-tools-mode) 'disabled)
       "Tools are disabled in this conversation: answer from what the user shows you.\n")
      ((forj-session-native-p)
       (concat "Use the functions you are given to read and change the project.  "
               (forj-session--rules)))
      (t
       (concat
        "## Tools\n\n"
        "To use a tool, write a fenced code block with the info string `tool-call` holding "
        "one JSON object: a unique \"id\", the tool's \"name\" and its \"args\".  One call per "
        "block; you may write several blocks in one message, and they run in order.  Then "
        "stop and wait: forj runs the calls (the user reviews edits first) and answers with "
        "one `tool-result` block per call: {\"id\", \"name\", \"ok\": true, \"result\"} or "
        "{\"id\", \"name\", \"ok\": false, \"error\": {\"type\", \"message\", \"details\", "
        "\"recovery\"}}.  Follow the recovery steps of an error.\n\n"
        "Example:\n\n"
        "```tool-call\n{\"id\": \"1\", \"name\": \"read_file\", \"args\": {\"path\": \"README.md\"}}\n```\n\n"
        "answered by\n\n"
        "```tool-result\n{\"id\": \"1\", \"name\": \"read_file\", \"ok\": true, \"result\": "
        "{\"path\": \"README.md\", \"content\": \"# Demo\\n\", \"truncated\": false}}\n```\n\n"
        (forj-session--rules)
        "\n## The tools (JSON Schema of args)\n\n"
        (mapconcat (lambda (tool)
                     (format "### %s\n%s\nargs: %s\n"
                             (plist-get tool :name) (plist-get tool :description)
                             (forj-tools-json-encode (plist-get tool :parameters))))
                   tools "\n"))))
     (forj-session--permission-prompt)
     (forj-instructions-section root (forj-session-record forj-session))
     (if forj-chat-extra-instructions (concat "\n" forj-chat-extra-instructions "\n") ""))))

(defun forj-session--permission-prompt ()
  "The sentences the worker's rules add to the system prompt, as a section."
  (if (or (null (forj-session-permission-instructions forj-session))
          (eq (forj-session-effective-tools-mode) 'disabled))
      ""
    (concat "\n## Rules of this project\n\n"
            (mapconcat (lambda (line) (concat "- " line "\n"))
                       (cl-remove-if-not #'stringp (forj-session-permission-instructions forj-session)) ""))))

(defun forj-session--rules ()
  "The rules the model will meet."
  (concat
   "Rules: paths are relative to the project root and stay inside it.  Read a file "
   "(read_file) before you change it, and read it again if it changed; an edit based on "
   "stale content is refused.  Prefer `edit` or `edit_region` to rewriting whole files.  "
   "The user may deny a call and say why: take the reason into account.  Keep going until "
   "the task is done, then answer without tool calls.\n"))

(provide 'forj-session)
;;; forj-session.el ends here
